"""nimbus.algos.ppo"""
