"""perfkit launch --hosts: a user's own hosts reached over SSH (docs/cluster.md)."""
