"""Capacity and server limits: the plan of which cells can run, the engine table, the server's limits (read or learned) and the client's own capacity."""
