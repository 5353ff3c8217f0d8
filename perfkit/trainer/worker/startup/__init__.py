"""The directory ``perfkit launch`` puts first on a launched command's ``PYTHONPATH``: its ``sitecustomize``
installs perfkit's recorder in that interpreter (docs/own-script.md). Nothing here is imported by perfkit."""
