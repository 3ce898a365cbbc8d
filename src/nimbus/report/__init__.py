"""nimbus.report"""
