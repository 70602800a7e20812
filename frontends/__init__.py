"""tacos.frontends package."""
