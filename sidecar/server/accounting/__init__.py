"""What a request costs: tokens counted, the budget gate that holds and charges them, and the
audit record with its model charges."""
