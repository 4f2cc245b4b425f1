"""The SimPy model of the cluster and the driver that advances it between decision points."""
