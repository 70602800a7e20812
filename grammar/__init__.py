"""tacos.grammar package."""
