"""tacos.backends package."""
