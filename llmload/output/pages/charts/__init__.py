"""The charts: the report's, the workloads', the compare page's and the web UI's, drawn with matplotlib as inline SVG."""
