"""nimbus.analysis"""
