"""The wire: request and response models shared by the broker and the SDK, and the
client's configuration. Imports nothing from :mod:`stoker.broker`."""
