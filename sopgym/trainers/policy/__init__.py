"""Policies that produce one assistant turn for a batch of episodes."""
