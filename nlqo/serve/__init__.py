"""`nlqo serve`: the HTTP service, its limits and guards, and the web console."""
