"""The words the generated catalogue is made of: product types with their category path, type nouns, attribute
pool, option dimensions and price range. Data only; `catalogue.py` turns it into products and instructions.

A type's `nouns` are the words that name it ("deodorant stick" -> deodorant, stick): the reward's noun overlap
(WebShop tags nouns with spaCy) uses exactly these, so it is exact on our catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProductType:
    name: str  # the search query a shopper would type, and the product's `query` field
    nouns: tuple[str, ...]
    category: str  # path joined with " > " (WebShop's `product_category`, normalised to ASCII)
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]  # (dimension, values)
    price: tuple[float, float]


SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large")
COLOURS = ("black", "white", "navy blue", "heather gray", "olive green", "burgundy", "beige", "pink", "sky blue")
SHOE_SIZES = ("6", "7", "7.5", "8", "8.5", "9", "10", "11", "12")

_B = "Beauty & Personal Care"
_G = "Grocery & Gourmet Food"
_E = "Electronics"
_F = "Clothing, Shoes & Jewelry"
_H = "Home & Kitchen"


def _t(name, nouns, category, attributes, options, price) -> ProductType:
    return ProductType(name, tuple(nouns.split()), category, tuple(attributes.split(", ")),
                       tuple((k, tuple(v)) for k, v in options.items()), price)


PRODUCT_TYPES: tuple[ProductType, ...] = (
    # beauty
    _t("deodorant stick", "deodorant stick", f"{_B} > Personal Care > Deodorants & Antiperspirants",
       "unscented, aluminum free, sensitive skin, long lasting, natural ingredients, paraben free, cruelty free, travel size",
       {"size": ("2.6 oz", "3 oz", "pack of 2", "pack of 3"), "scent": ("unscented", "lavender", "cedarwood", "citrus", "coconut")}, (5, 28)),
    _t("shampoo", "shampoo", f"{_B} > Hair Care > Shampoo & Conditioner",
       "sulfate free, dry hair, color treated, paraben free, anti dandruff, curly hair, tea tree oil, argan oil",
       {"size": ("8 fl oz", "12 fl oz", "16.9 fl oz", "33.8 fl oz")}, (6, 40)),
    _t("face moisturizer", "face moisturizer", f"{_B} > Skin Care > Face > Moisturizers",
       "oil free, fragrance free, sensitive skin, hyaluronic acid, spf 30, anti aging, dry skin, non comedogenic",
       {"size": ("1.7 oz", "2.5 oz", "3.4 oz")}, (9, 60)),
    _t("lipstick", "lipstick", f"{_B} > Makeup > Lips > Lipstick",
       "long lasting, matte finish, cruelty free, vegan, moisturizing, waterproof, highly pigmented, smudge proof",
       {"color": ("ruby red", "nude pink", "berry", "coral", "mauve", "plum")}, (5, 35)),
    _t("nail polish", "nail polish", f"{_B} > Foot, Hand & Nail Care > Nail Polish",
       "quick dry, long lasting, non toxic, chip resistant, vegan, high gloss, easy to apply",
       {"color": ("red", "pink", "black", "navy blue", "white", "gold"), "size": ("0.5 fl oz", "pack of 3")}, (4, 25)),
    _t("hair dryer", "hair dryer", f"{_B} > Hair Care > Styling Tools > Hair Dryers",
       "ionic, low noise, fast drying, lightweight, cool shot button, diffuser included, foldable handle, ceramic",
       {"color": ("black", "white", "rose gold", "pink")}, (19, 120)),
    _t("toothpaste", "toothpaste", f"{_B} > Oral Care > Toothpaste",
       "fluoride free, whitening, sensitive teeth, natural ingredients, fresh breath, enamel protection, vegan",
       {"size": ("4 oz", "pack of 2", "pack of 4"), "flavor": ("mint", "spearmint", "cinnamon", "charcoal")}, (3, 22)),
    _t("body wash", "body wash", f"{_B} > Personal Care > Body > Body Wash",
       "moisturizing, sulfate free, dry skin, natural ingredients, gentle cleansing, paraben free, shea butter",
       {"size": ("12 fl oz", "18 fl oz", "pack of 2"), "scent": ("eucalyptus", "vanilla", "oatmeal", "unscented")}, (5, 30)),
    # grocery
    _t("green tea", "tea", f"{_G} > Beverages > Tea > Green Tea",
       "organic, decaffeinated, gluten free, non gmo, individually wrapped, kosher, antioxidant rich",
       {"size": ("20 count", "50 count", "100 count"), "flavor": ("jasmine", "mint", "lemon", "original", "honey ginseng")}, (4, 30)),
    _t("coffee beans", "coffee beans", f"{_G} > Beverages > Coffee > Whole Bean",
       "whole bean, medium roast, dark roast, fair trade, organic, low acid, single origin, kosher",
       {"size": ("12 oz", "2 lb", "5 lb")}, (9, 70)),
    _t("protein bar", "protein bar", f"{_G} > Snack Foods > Bars > Protein Bars",
       "gluten free, low sugar, high protein, keto friendly, plant based, non gmo, dairy free",
       {"flavor": ("chocolate chip", "peanut butter", "cookie dough", "vanilla almond"), "size": ("12 count", "24 count")}, (12, 45)),
    _t("olive oil", "olive oil", f"{_G} > Pantry Staples > Cooking Oils > Olive Oil",
       "extra virgin, cold pressed, organic, non gmo, first cold extraction, kosher, glass bottle",
       {"size": ("16.9 fl oz", "33.8 fl oz", "1 gallon")}, (8, 55)),
    _t("crackers", "crackers", f"{_G} > Snack Foods > Crackers",
       "gluten free, low sodium, whole grain, non gmo, vegan, individually wrapped, baked not fried",
       {"flavor": ("sea salt", "cheddar", "rosemary", "black pepper"), "size": ("pack of 6", "pack of 12")}, (4, 35)),
    _t("honey", "honey", f"{_G} > Pantry Staples > Honey",
       "raw, unfiltered, organic, non gmo, kosher, gluten free, glass jar, squeeze bottle",
       {"size": ("12 oz", "16 oz", "32 oz", "5 lb")}, (7, 45)),
    _t("dark chocolate", "chocolate", f"{_G} > Candy & Chocolate > Chocolate Bars",
       "sugar free, vegan, organic, fair trade, gluten free, keto friendly, individually wrapped, 70% cacao",
       {"flavor": ("sea salt", "almond", "mint", "orange", "original"), "size": ("pack of 4", "pack of 12")}, (5, 40)),
    _t("hot sauce", "sauce", f"{_G} > Pantry Staples > Condiments > Hot Sauce",
       "gluten free, non gmo, vegan, low sodium, extra hot, no sugar added, small batch",
       {"flavor": ("habanero", "chipotle", "jalapeno", "ghost pepper"), "size": ("5 fl oz", "pack of 3")}, (4, 30)),
    # electronics
    _t("wireless earbuds", "earbuds", f"{_E} > Headphones & Earbuds > Earbud Headphones",
       "noise cancelling, bluetooth 5.3, water resistant, long battery life, charging case, fast charging, built-in microphone",
       {"color": ("black", "white", "navy blue", "pink")}, (15, 150)),
    _t("phone case", "phone case", f"{_E} > Cell Phones & Accessories > Cases",
       "shockproof, slim fit, wireless charging compatible, screen protector included, kickstand, anti scratch, drop protection",
       {"color": ("black", "clear", "navy blue", "pink", "green"), "size": ("iphone 14", "iphone 15 pro", "galaxy s23", "pixel 8")}, (6, 30)),
    _t("usb c cable", "cable", f"{_E} > Accessories > Cables > USB Cables",
       "fast charging, braided nylon, data transfer, durable, 100w, tangle free, aluminum connector",
       {"size": ("3 ft", "6 ft", "10 ft", "pack of 3"), "color": ("black", "white", "gray")}, (5, 25)),
    _t("hdmi cable", "hdmi cable", f"{_E} > Accessories > Cables > HDMI Cables",
       "4k, high speed, gold plated, ethernet, 8k, braided, ultra hd",
       {"size": ("3 ft", "6 ft", "15 ft", "pack of 2")}, (5, 30)),
    _t("portable charger", "charger power bank", f"{_E} > Cell Phones & Accessories > Portable Power Banks",
       "fast charging, usb c, 20000mah, compact, led display, wireless charging, airline safe",
       {"color": ("black", "white", "blue")}, (15, 70)),
    _t("bluetooth speaker", "speaker", f"{_E} > Portable Audio & Video > Bluetooth Speakers",
       "waterproof, long battery life, stereo sound, bass boost, portable, built-in microphone, outdoor",
       {"color": ("black", "red", "blue", "teal")}, (20, 150)),
    _t("laptop stand", "laptop stand", f"{_E} > Computers & Accessories > Laptop Accessories > Stands",
       "adjustable height, aluminum, foldable, ergonomic, ventilated, non slip, portable",
       {"color": ("silver", "space gray", "black")}, (15, 60)),
    _t("wireless mouse", "mouse", f"{_E} > Computers & Accessories > Mice",
       "ergonomic, silent click, rechargeable, bluetooth, usb receiver, adjustable dpi, long battery life",
       {"color": ("black", "white", "gray", "pink")}, (9, 50)),
    # fashion
    _t("men's t-shirt", "t-shirt shirt", f"{_F} > Men > Clothing > Shirts > T-Shirts",
       "cotton, short sleeve, machine wash, regular fit, crew neck, moisture wicking, tagless",
       {"size": SIZES, "color": COLOURS}, (9, 35)),
    _t("running shoes", "shoes", f"{_F} > Men > Shoes > Athletic > Running",
       "lace up, rubber sole, breathable mesh, arch support, non slip, lightweight, cushioned",
       {"size": SHOE_SIZES, "color": ("black", "white", "gray", "navy blue", "red")}, (30, 130)),
    _t("women's dress", "dress", f"{_F} > Women > Clothing > Dresses",
       "short sleeve, machine wash, polyester, v neck, casual, floral print, pockets, knee length",
       {"size": SIZES[:5], "color": ("black", "red", "floral blue", "green", "yellow", "white")}, (18, 70)),
    _t("jeans", "jeans", f"{_F} > Men > Clothing > Jeans",
       "slim fit, stretch, button closure, machine wash, straight leg, high waist, relaxed fit",
       {"size": ("28w x 30l", "30w x 32l", "32w x 32l", "34w x 32l", "36w x 34l"), "color": ("dark wash", "light wash", "black")}, (20, 80)),
    _t("hoodie", "hoodie", f"{_F} > Women > Clothing > Fashion Hoodies & Sweatshirts",
       "fleece lined, long sleeve, drawstring, kangaroo pocket, machine wash, oversized, cotton blend",
       {"size": SIZES, "color": COLOURS}, (18, 60)),
    _t("wool socks", "socks", f"{_F} > Men > Clothing > Socks",
       "merino wool, cushioned, moisture wicking, breathable, hiking, warm, machine wash",
       {"size": ("small", "medium", "large"), "color": ("gray", "black", "brown", "multicolor")}, (9, 35)),
    _t("winter jacket", "jacket", f"{_F} > Women > Clothing > Coats, Jackets & Vests",
       "waterproof, hooded, windproof, warm, zip closure, packable, insulated",
       {"size": SIZES[:5], "color": ("black", "navy blue", "burgundy", "olive green")}, (40, 180)),
    _t("sunglasses", "sunglasses", f"{_F} > Accessories > Sunglasses & Eyewear",
       "polarized, uv protection, lightweight, metal frame, unisex, scratch resistant, case included",
       {"color": ("black", "tortoise", "gold", "silver")}, (9, 90)),
    # home
    _t("throw pillow cover", "pillow cover", f"{_H} > Home Decor > Decorative Pillows & Covers",
       "machine washable, double sided, hidden zipper, velvet, living room, decorative, soft",
       {"size": ("18 x 18 inch", "20 x 20 inch", "pack of 2", "pack of 4"), "color": ("beige", "navy blue", "sage green", "mustard yellow", "gray")}, (8, 35)),
    _t("bath towel", "towel", f"{_H} > Bath > Towels > Bath Towels",
       "cotton, quick dry, highly absorbent, soft, machine washable, oversized, hotel quality",
       {"size": ("set of 2", "set of 4", "set of 6"), "color": ("white", "gray", "navy blue", "aqua")}, (15, 60)),
    _t("coffee maker", "coffee maker", f"{_H} > Kitchen & Dining > Coffee, Tea & Espresso > Coffee Makers",
       "programmable, auto shut off, stainless steel, reusable filter, keep warm, single serve, easy to clean",
       {"size": ("5 cup", "12 cup"), "color": ("black", "silver", "red")}, (25, 150)),
    _t("knife set", "knife set", f"{_H} > Kitchen & Dining > Cutlery & Knife Accessories",
       "stainless steel, dishwasher safe, knife block, ergonomic handle, sharpener included, german steel",
       {"size": ("6 piece", "12 piece", "15 piece")}, (25, 150)),
    _t("bed sheets", "sheets sheet", f"{_H} > Bedding > Sheets & Pillowcases",
       "deep pocket, microfiber, wrinkle free, breathable, cooling, machine washable, egyptian cotton",
       {"size": ("twin", "full", "queen", "king"), "color": ("white", "gray", "navy blue", "sage green", "beige")}, (20, 90)),
    _t("desk lamp", "lamp", f"{_H} > Lighting > Lamps & Shades > Desk Lamps",
       "led, dimmable, usb charging port, eye caring, touch control, adjustable arm, energy efficient",
       {"color": ("black", "white", "silver")}, (15, 60)),
    _t("storage bins", "bins storage", f"{_H} > Storage & Organization > Baskets, Bins & Containers",
       "foldable, fabric, handles, stackable, closet organizer, lidded, washable",
       {"size": ("set of 3", "set of 6"), "color": ("gray", "beige", "black", "navy blue")}, (12, 45)),
    _t("scented candle", "candle", f"{_H} > Home Decor > Candles & Holders > Candles",
       "soy wax, long burning, natural, lead free wick, glass jar, gift, essential oils",
       {"scent": ("lavender", "vanilla", "sandalwood", "fresh linen", "pumpkin spice"), "size": ("8 oz", "14 oz")}, (9, 40)),
)

BRAND_SYLLABLES = ("ve", "lo", "ra", "nu", "vi", "ka", "zen", "mo", "ta", "li", "so", "ber", "dor", "fin", "ga", "pa",
                   "ri", "xo", "el", "an", "mar", "to", "qui", "sa")
TITLE_EXTRAS = ("for Men and Women", "for Everyday Use", "Gift Idea", "Premium Quality", "New Version", "Best Seller",
                "Value Pack", "Original", "Classic", "2024 Edition")
REVIEW_TEMPLATES = (
    (5, "Love this {type}. It is {attr} exactly as described."),
    (4, "Good {type} for the price; {attr} and arrived quickly."),
    (3, "The {type} is okay. I expected it to be more {attr}."),
    (2, "Not great. The {type} is {attr} but broke after a few weeks."),
    (5, "Bought a second one. {attr} and really well made."),
    (1, "Did not work for me at all; returned the {type}."),
)
