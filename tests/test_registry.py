import types

import pytest

from django_procedures import Procedure, Status, registry, step
from django_procedures.exceptions import ProceduresConfigError, UnknownProcedureType


def test_type_name_defaults_to_module_and_qualname():
    class Plain(Procedure):
        @step
        def only(self, ctx):
            pass

    assert Plain.type_name == "tests.test_registry.test_type_name_defaults_to_module_and_qualname.<locals>.Plain"
    assert registry.get(Plain.type_name) is Plain


def test_two_classes_with_one_type_name_is_an_error():
    class First(Procedure):
        type_name = "tests.duplicate"

        @step
        def a(self, ctx):
            pass

    with pytest.raises(ProceduresConfigError, match=r"two procedure classes share the type name 'tests\.duplicate'"):
        class Second(Procedure):
            type_name = "tests.duplicate"

            @step
            def a(self, ctx):
                pass


def test_a_class_without_steps_must_say_it_is_abstract():
    with pytest.raises(ProceduresConfigError, match="set abstract = True"):
        class Empty(Procedure):
            pass

    class Base(Procedure):
        abstract = True

    class Concrete(Base):
        @step
        def go(self, ctx):
            pass

    assert registry.get(Concrete.type_name) is Concrete
    assert Base.type_name not in registry.type_names()


def test_steps_keep_class_order_and_inherit():
    class Parent(Procedure):
        abstract = True

        @step
        def b_first(self, ctx):
            pass

        @step
        def a_second(self, ctx):
            pass

    class Child(Parent):
        @step
        def c_third(self, ctx):
            return Status.done()

    assert [s.name for s in Child.steps] == ["b_first", "a_second", "c_third"]


def test_unknown_type_names_say_where_to_define_them():
    with pytest.raises(UnknownProcedureType, match="no procedure class is registered as 'nope'"):
        registry.get("nope")


def test_non_idempotent_steps_cannot_be_atomic():
    with pytest.raises(TypeError, match="cannot be atomic"):
        step(idempotent=False, atomic=True)
    spec = step(idempotent=False)(lambda self, ctx: None)._procedure_step
    assert (spec.atomic, spec.idempotent) == (False, False)


def test_autodiscovery_found_the_test_apps_procedures():
    assert "testapp.ThreeSteps" in registry.type_names()


def test_isolated_registry_forgets_the_classes_defined_inside_it():
    from django_procedures.testing import isolated_registry

    before = registry.type_names()
    with isolated_registry():
        class Temporary(Procedure):
            type_name = "tests.Temporary"

            @step
            def only(self, ctx):
                pass

        assert registry.get("tests.Temporary") is Temporary
    assert registry.type_names() == before
    with pytest.raises(UnknownProcedureType):
        registry.get("tests.Temporary")


async def _async_step(self, ctx):
    pass


async def _async_generator_step(self, ctx):
    yield


@pytest.mark.parametrize(("name", "method"), [
    ("charge", step(_async_step)),
    ("charge", step(atomic=False)(_async_generator_step)),
    ("execute", _async_step),
    ("rollback", _async_step),
    ("on_child_failed", _async_step),
])
def test_an_async_step_or_method_is_refused_when_the_class_is_defined(name, method):
    def body(ns):
        ns.update(__module__=__name__, type_name="tests.AsyncStep", go=step(lambda self, ctx: None), **{name: method})

    message = (rf"tests\.test_registry\.AsyncStep\.{name} is an async def: async steps are not supported yet; write "
               r"it as a plain def \(call async code from it with asgiref\.sync\.async_to_sync\)")
    with pytest.raises(ProceduresConfigError, match=message):
        types.new_class("AsyncStep", (Procedure,), exec_body=body)
    assert "tests.AsyncStep" not in registry.type_names()


def test_an_async_step_in_an_abstract_base_is_refused_there_too():
    with pytest.raises(ProceduresConfigError, match=r"AsyncBase\.go is an async def"):
        class AsyncBase(Procedure):
            abstract = True

            @step
            async def go(self, ctx):
                pass
