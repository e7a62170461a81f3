"""The package version (read by the root package and by the adapter config it records in saved adapters)."""

__version__ = "0.1.0"
