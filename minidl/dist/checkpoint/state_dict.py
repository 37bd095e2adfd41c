"""get_/set_ model and optimizer state dicts keyed by parameter names (torch.distributed.checkpoint.state_dict)."""
