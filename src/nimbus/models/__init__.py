"""nimbus.models"""
