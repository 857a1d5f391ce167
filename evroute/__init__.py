"""evroute: online energy-efficient routing of electric vehicles with combinatorial GP bandits."""

__version__ = "0.1.0"
