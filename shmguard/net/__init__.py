"""HTTP/1.1 over non-blocking sockets, standard library only: what the webhook (HTTPS) and the exporter (HTTP)
serve with.

- `http.py`: request heads, parsed strictly (pure);
- `connections.py`: one selector loop over every connection, with a deadline for each wait on a client, a cap on
  connections and a bound on what each may buffer; the servers answer the requests (shmguard.webhook.server,
  shmguard.exporter.server).
"""
