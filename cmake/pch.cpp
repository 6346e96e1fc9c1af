// Owns the precompiled header (core/pch.h) that every brrr target reuses.
