"""``clawc import openapi``: a descriptor (version 2) from an OpenAPI or Swagger document."""
