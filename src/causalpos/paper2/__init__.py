"""paper2"""
