"""mambaxfer: plan, check and execute P/D transfers of Mamba-family state."""

__version__ = "0.1.0"
