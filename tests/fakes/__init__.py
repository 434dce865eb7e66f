"""Loopback fake servers for the model providers' APIs (real HTTP, real SDKs):
``tests.fakes.messages_api.FakeMessagesAPI`` and ``tests.fakes.chat_api.FakeChatAPI``."""
