"""Text worlds: ALFWorld-like household games (TextWorld) and a WebShop-like shop."""
