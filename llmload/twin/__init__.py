"""The fitted twin: a server's profile run in virtual time (`predict`), and a profile fitted
to a measured run (`fit`). It drives no Locust and opens no socket, so it sits beside
`llmload.matrix`, not in it."""
