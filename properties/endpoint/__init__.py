"""Audits of served speculative-decoding engines through their HTTP APIs (llama.cpp's llama-server first)."""
