"""Porting weights between layouts: map entries (``entries``) and the port map that moves
canonical tensors into a variant's module and back (``portmap``).
"""
