"""fedcore: a fast federated-learning simulation engine for reproducing FedAvg, FedNNNN and FedUmf."""

__version__ = "0.1.0"
