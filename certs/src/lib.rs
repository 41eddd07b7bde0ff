//! Webhook certificate life cycle (issue 5): placeholder until the rcgen code lands.
