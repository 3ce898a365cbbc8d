"""nimbus.cost"""
