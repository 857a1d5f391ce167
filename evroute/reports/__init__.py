"""Reports: figures, GeoJSON and GeoDataFrames, the text reports of networks and runs.

The package's public names are importable from :mod:`evroute` itself."""
