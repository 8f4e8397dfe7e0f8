"""How a command lives and ends: Ctrl-C/SIGTERM into one line and a resumable run, Ray's set-up and its GCS watch."""
