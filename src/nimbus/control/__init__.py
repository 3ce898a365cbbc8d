"""Controllers: small objects deciding, once per round, actors, aggregation, sharing and pre-warm."""
