"""The infrastructure every layer uses: configuration, paths, atomic I/O, errors, provenance,
threads and disk checks."""
