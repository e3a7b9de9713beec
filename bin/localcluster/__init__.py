"""A cluster of namespace hosts on one machine, for rehearsing a multi-host
job (bin/psgd-local-cluster). Standard library only: it runs with any
python3, before and outside any virtualenv, and must never start MPI."""
