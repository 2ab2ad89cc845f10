"""Selection policy, action cycles and the search loop."""
