"""The JetStream API's handlers: requests on `$JS.API.>` answered from streams and consumers."""
