"""paper1"""
