"""nimbus.envs"""
