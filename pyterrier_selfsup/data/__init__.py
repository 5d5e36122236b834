"""Collections by name (ir_datasets and the classic SMART-format ones)
and training queries without a query log."""
