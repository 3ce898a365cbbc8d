"""nimbus.train"""
