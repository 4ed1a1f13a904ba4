"""The Locust load generator: the streaming user, the plugin (the worker side of the cell protocol, the load monitor), the typed cell messages, the web UI tab."""
