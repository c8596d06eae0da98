"""The tenant's webhooks: endpoints told of its boxes' events by a signed POST
(`client.webhooks`; bodies and signatures in docs/webhooks.md)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import _api
from ._async import AsyncTransport
from ._sync import Transport
from ._views import WebhookView
from .models_account import Delivery, WebhookInfo


def _deliveries(data: Dict[str, Any]) -> List[Delivery]:
    return [Delivery.from_json(d) for d in data["deliveries"]]


def _made(data: Dict[str, Any]) -> Tuple[WebhookInfo, str]:
    return WebhookInfo.from_json(data), data["secret"]


class Webhooks:
    """The tenant's webhooks (at most 20)."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    def create(
        self, url: str, *, events: Sequence[str], description: Optional[str] = None
    ) -> "Webhook":
        """Registers `url` (`https://`, not a private address) for `events`; the answer's
        `secret` signs every delivery and is shown only here."""
        info, secret = _made(self._t.send(_api.create_webhook(url, events, description)).json())
        return Webhook(self._t, info, secret)

    def list(self) -> List["Webhook"]:
        answer = self._t.send(_api.list_webhooks()).json()
        return [Webhook(self._t, WebhookInfo.from_json(w)) for w in answer["webhooks"]]

    def get(self, webhook_id: str) -> "Webhook":
        answer = self._t.send(_api.get_webhook(webhook_id))
        return Webhook(self._t, WebhookInfo.from_json(answer.json()))

    def delete(self, webhook_id: str) -> None:
        """Deletes the webhook and its deliveries."""
        self._t.send(_api.delete_webhook(webhook_id))


class Webhook(WebhookView):
    """One webhook: `secret` only on the one `create` answered."""

    def __init__(self, transport: Transport, info: WebhookInfo, secret: Optional[str] = None):
        self._t = transport
        self.info = info
        self.secret = secret

    def test(self) -> Delivery:
        """Sends a `webhook.test` event; answers its delivery after the first attempt."""
        return Delivery.from_json(self._t.send(_api.webhook_test(self.id)).json())

    def deliveries(self, *, limit: Optional[int] = None) -> List[Delivery]:
        """The newest deliveries first (50 by default, at most 500; kept 7 days)."""
        return _deliveries(self._t.send(_api.webhook_deliveries(self.id, limit)).json())

    def delete(self) -> None:
        self._t.send(_api.delete_webhook(self.id))


class AsyncWebhooks:
    """The tenant's webhooks, as `Webhooks`."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def create(
        self, url: str, *, events: Sequence[str], description: Optional[str] = None
    ) -> "AsyncWebhook":
        answer = await self._t.send(_api.create_webhook(url, events, description))
        info, secret = _made(answer.json())
        return AsyncWebhook(self._t, info, secret)

    async def list(self) -> List["AsyncWebhook"]:
        answer = (await self._t.send(_api.list_webhooks())).json()
        return [AsyncWebhook(self._t, WebhookInfo.from_json(w)) for w in answer["webhooks"]]

    async def get(self, webhook_id: str) -> "AsyncWebhook":
        answer = await self._t.send(_api.get_webhook(webhook_id))
        return AsyncWebhook(self._t, WebhookInfo.from_json(answer.json()))

    async def delete(self, webhook_id: str) -> None:
        await self._t.send(_api.delete_webhook(webhook_id))


class AsyncWebhook(WebhookView):
    """One webhook, as `Webhook`."""

    def __init__(
        self, transport: AsyncTransport, info: WebhookInfo, secret: Optional[str] = None
    ) -> None:
        self._t = transport
        self.info = info
        self.secret = secret

    async def test(self) -> Delivery:
        return Delivery.from_json((await self._t.send(_api.webhook_test(self.id))).json())

    async def deliveries(self, *, limit: Optional[int] = None) -> List[Delivery]:
        return _deliveries((await self._t.send(_api.webhook_deliveries(self.id, limit))).json())

    async def delete(self) -> None:
        await self._t.send(_api.delete_webhook(self.id))
