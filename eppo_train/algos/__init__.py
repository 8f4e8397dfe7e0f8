"""The algorithms: advantage estimators, policy losses and the EPPO entropy pacer, each loss and estimator a registry entry."""
