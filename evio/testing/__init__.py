"""Fakes of evio's OS-facing interfaces, shared by unit tests, the simulator and the lab."""
