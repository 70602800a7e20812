"""MSCCL program model, lowering and verification."""
