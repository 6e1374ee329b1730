"""The package version, in a leaf module so the on-disk headers can name their producer."""

__version__ = "0.1.0"
