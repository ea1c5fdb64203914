"""The providers: each provider's client and keys (key pool), the model router and route
plans, which protocols a provider serves, and whether it streams tool rounds."""
