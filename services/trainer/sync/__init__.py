"""Weight sync: getting the trainer's new weights into every registered replica."""
