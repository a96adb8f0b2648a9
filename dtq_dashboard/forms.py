"""Filter and action forms: bound to GET/POST data, they reject malformed or oversized input."""

from __future__ import annotations

from django import forms

from dtq_core.engine.audit import AUDIT_SOURCES
from dtq_core.engine.dlq_walk import GROUP_MESSAGE_CHARS
from dtq_core.engine.limits import MAX_CONCURRENCY, MAX_PERIOD_S, MAX_RATE, MIN_PERIOD_S
from dtq_core.keys import DLQ_REF_RE
from dtq_core.task import QUEUE_NAME_RE, RESERVED_QUEUES, TASK_TYPE_RE, Status

ENTRY_ID_RE = DLQ_REF_RE  # a dead letter's id: its partition's tag and its entry id
MAX_SELECTED = 500  # a page holds at most 500 rows; more is a malformed request
TEXT_MAX = 200


def _queue_name(value: str) -> None:
    if value and (not QUEUE_NAME_RE.fullmatch(value) or value in RESERVED_QUEUES):
        raise forms.ValidationError("not a queue name")


def _task_type(value: str) -> None:
    if value and not TASK_TYPE_RE.fullmatch(value):
        raise forms.ValidationError("not a task type")


class _Form(forms.Form):
    def first_error(self) -> str:
        for name, errors in self.errors.items():
            return f"{name}: {errors[0]}" if name != "__all__" else str(errors[0])
        return "invalid input"


class DlqFilterForm(_Form):
    queue = forms.CharField(required=False, max_length=64, validators=[_queue_name])
    type = forms.CharField(required=False, max_length=TEXT_MAX, validators=[_task_type])
    q = forms.CharField(required=False, max_length=TEXT_MAX, strip=True)
    # One error group (the group links): with type, its error class and message exactly, as
    # /dlq/ shows them. Given (even empty: an error without a message is a group too) or not.
    # (Django's form metaclass moves declared fields off the class: Form.error_class, the class of
    # error lists, is not replaced by this field.)
    error_class = forms.CharField(required=False, max_length=1000, strip=False)  # type: ignore[assignment]
    message = forms.CharField(required=False, max_length=GROUP_MESSAGE_CHARS, strip=False)
    cursor = forms.CharField(required=False, max_length=64)

    def filters(self) -> dict[str, str | None]:
        """The filters given; a key set to None is no filter (queue, type and q are never "")."""
        data = self.cleaned_data
        group = {name: data.get(name, "") if name in self.data else None for name in ("error_class", "message")}
        return {"queue": data.get("queue") or None, "type": data.get("type") or None, "q": data.get("q") or None,
                **group}


class DlqMatchingForm(DlqFilterForm):
    """Retry/Discard all matching: the filter plus the confirmation the preview page adds."""

    confirm = forms.CharField(required=False, max_length=8)
    expected = forms.IntegerField(required=False, min_value=0)


class DlqIdsForm(_Form):
    """Retry/Discard selected rows (or one row): dead-letter ids (keys.dlq_ref)."""

    def __init__(self, data: object) -> None:
        super().__init__(data)  # type: ignore[arg-type]
        self.ids: list[str] = []

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        raw = self.data.getlist("ids") if hasattr(self.data, "getlist") else []
        if not raw:
            raise forms.ValidationError("select at least one dead letter first")
        if len(raw) > MAX_SELECTED:
            raise forms.ValidationError(f"at most {MAX_SELECTED} dead letters can be selected at once")
        if not all(ENTRY_ID_RE.fullmatch(eid) for eid in raw):
            raise forms.ValidationError("not a dead-letter entry id")
        self.ids = list(dict.fromkeys(raw))
        return cleaned


class TaskFilterForm(_Form):
    id = forms.CharField(required=False, max_length=128)
    queue = forms.CharField(required=False, max_length=64, validators=[_queue_name])
    status = forms.ChoiceField(required=False, choices=[("", "any")] + [(s.value, s.value) for s in Status])
    type = forms.CharField(required=False, max_length=TEXT_MAX, validators=[_task_type])
    periodic_name = forms.CharField(required=False, max_length=TEXT_MAX)
    q = forms.CharField(required=False, max_length=200, strip=False)
    # datetime-local inputs ("2026-12-05T08:00"), read as UTC like every time the console shows.
    after = forms.CharField(required=False, max_length=40)
    before = forms.CharField(required=False, max_length=40)
    cursor = forms.CharField(required=False, max_length=80)  # "<created ms>-<task id>"


class WorkflowFilterForm(_Form):
    status = forms.ChoiceField(required=False, choices=[("", "any")] + [
        (s, s) for s in ("RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")])
    cursor = forms.CharField(required=False, max_length=80)  # "<created ms>:<workflow id>"


class AuditFilterForm(_Form):
    action = forms.CharField(required=False, max_length=64)
    actor = forms.CharField(required=False, max_length=TEXT_MAX)
    source = forms.ChoiceField(required=False, choices=[("", "any")] + [(s, s) for s in AUDIT_SOURCES])
    cursor = forms.CharField(required=False, max_length=64)


class CursorForm(_Form):
    cursor = forms.CharField(required=False, max_length=160)


class LimitsForm(_Form):
    """A queue's limits as the console's form sends them: an empty box is no such limit. A rate is
    two boxes (starts, per seconds), both given or both empty."""

    concurrency = forms.IntegerField(required=False, min_value=1, max_value=MAX_CONCURRENCY)
    rate_limit = forms.IntegerField(required=False, min_value=1, max_value=MAX_RATE)
    rate_period_s = forms.FloatField(required=False, min_value=MIN_PERIOD_S, max_value=MAX_PERIOD_S)
    group_concurrency = forms.IntegerField(required=False, min_value=1, max_value=MAX_CONCURRENCY)
    group_rate_limit = forms.IntegerField(required=False, min_value=1, max_value=MAX_RATE)
    group_rate_period_s = forms.FloatField(required=False, min_value=MIN_PERIOD_S, max_value=MAX_PERIOD_S)

    def clean(self) -> dict[str, object]:
        cleaned = super().clean() or {}
        for name in ("rate", "group_rate"):
            limit, period = cleaned.get(f"{name}_limit"), cleaned.get(f"{name}_period_s")
            if (limit is None) != (period is None) and not self.errors:
                raise forms.ValidationError(f"{name.replace('_', ' ')}: give both the starts and the period, "
                                            "or neither")
        return cleaned

    def limits(self) -> dict[str, object]:
        """The engine's form of them (engine.limits.set)."""
        data = self.cleaned_data
        out: dict[str, object] = {"concurrency": data.get("concurrency"),
                                  "group_concurrency": data.get("group_concurrency")}
        for name in ("rate", "group_rate"):
            limit = data.get(f"{name}_limit")
            out[name] = None if limit is None else {"limit": limit, "period_s": data[f"{name}_period_s"]}
        return out
