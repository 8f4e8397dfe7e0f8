"""WebShop: a generated 10k-product shop (or WebShop's own files) in text mode and in headless Chromium.

Ids: `eppo/WebShop-v0` (text) and `eppo/WebShop-Browser-v0` (the same shop as HTML, driven through Selenium).
"""

import eppo_envs

eppo_envs.register(
    "eppo/WebShop-v0",
    entry_point="eppo_envs.webshop.env:WebShopEnv",
    task="webshop",
    description="Search a 10k-product shop, pick options and buy what an instruction asks for",
    max_episode_steps=15,
)
eppo_envs.register(
    "eppo/WebShop-Browser-v0",
    entry_point="eppo_envs.webshop.browser:WebShopBrowserEnv",
    task="webshop",
    description="WebShop served over HTTP and driven through Selenium with headless Chromium",
    max_episode_steps=15,
)
