"""Families: the interface each kind of component implements (call signature, canonical
parameters, cases, traits) and its float64 oracle. Layer families, whole models, training
pieces; ``catalog`` lists them all. Families know no variant and never import the registry.
"""
