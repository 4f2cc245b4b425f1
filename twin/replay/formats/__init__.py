"""One module per trace format; each turns a file into canonical job records."""
