"""Generated protobuf and gRPC modules of the zpipe.v1 API: run python/generate-protos, do not edit."""
