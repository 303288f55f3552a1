"""What every caller of a model shares: one retrying HTTP client, micro-batching, chat templates.

Policies, judges, reward models and the trainer's engines all talk to models; the plumbing they have
in common lives here, on the floor beside the contract, so none of them reaches into another's module.
"""
