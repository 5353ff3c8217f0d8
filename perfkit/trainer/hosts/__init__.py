"""Emulated hosts on one machine: CPU budgets (cgroups, core sets), private networks and shaped links
(network namespaces, veth, tc), and the janitor that removes whatever a run made, even after a crash."""
