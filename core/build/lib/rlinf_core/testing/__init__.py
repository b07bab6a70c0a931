"""Test doubles and conformance test classes for rlinf and its plugins."""
