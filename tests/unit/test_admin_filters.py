"""The dashboard's text filters: a long dotted name or a message quoting a URL wraps at its
punctuation, never inside a word, and stays escaped."""

from __future__ import annotations

from django_jobs.templatetags.django_jobs_admin import breakable, dotted


def test_a_dotted_name_may_wrap_after_each_dot():
    assert dotted("billing.jobs.<Voided>") == "billing.<wbr>jobs.<wbr>&lt;Voided&gt;"


def test_a_message_may_wrap_after_the_punctuation_of_its_urls_and_calls_and_stays_escaped():
    message = "Pool(host='api.example.com', port=443): url: /v2/x?a=1 <b>"
    assert breakable(message) == (
        "Pool(<wbr>host=<wbr>&#x27;api.<wbr>example.<wbr>com&#x27;,<wbr> port=<wbr>443):<wbr> url:<wbr>"
        " /<wbr>v2/<wbr>x?<wbr>a=<wbr>1 &lt;b&gt;"
    )
    assert breakable("") == "" and breakable("plain words") == "plain words"
